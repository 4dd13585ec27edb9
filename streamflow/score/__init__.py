"""Batch through streaming: ``streamflow score`` feeds a data set through an application.

* :mod:`~streamflow.score.plan`: which topic the data goes into, and which one
  the results come back from;
* :mod:`~streamflow.score.inputs`: the data set's rows (Parquet, CSV, JSON lines);
* :mod:`~streamflow.score.parquet_reader`: Parquet rows, read in a child process
  whose memory is capped;
* :mod:`~streamflow.score.engine`: the feed and the collection, with backpressure,
  counting and resume;
* :mod:`~streamflow.score.results`: the results and dead-letters files.
"""
