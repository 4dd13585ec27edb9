"""Batch through streaming: ``streamflow score`` feeds a data set through an application.

* :mod:`~streamflow.score.plan`: which topic the data goes into, and which one
  the results come back from;
* :mod:`~streamflow.score.inputs`: the data set in batches (Parquet as Arrow tables,
  CSV and JSON lines as rows), read on a thread ahead of the feed;
* :mod:`~streamflow.score.parquet_reader`: Parquet batches, read in a child process
  whose memory is capped;
* :mod:`~streamflow.score.feed`: a batch as the input topic's bytes, a table through
  the native column encoder (:mod:`~streamflow.score.arrow_arrays`: Arrow to numpy and
  back through the buffers);
* :mod:`~streamflow.score.engine`: the feed and the collection, with backpressure,
  counting and resume;
* :mod:`~streamflow.score.collected`: the results, kept as the columns they were
  decoded into;
* :mod:`~streamflow.score.results`: the results and dead-letters files.
"""
