"""Container images of streamflow and of its applications, built by ``streamflow build``.

In the spirit of Cloudflow's buildApp: ``plans`` works out what to build
(content tags, extras, the project's files) before anything runs, so
``--dry-run`` shows it; ``builders`` holds the command lines of buildah,
podman and docker; ``wheels`` makes the wheelhouse the builds install from;
``context`` is the pure part (ignore rules, extras, hashes). The Dockerfiles
live next to these modules, as package data, so an installed streamflow
builds images without a checkout.
"""
