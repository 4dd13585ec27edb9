"""The HTTP ingress of the operator tests' application: wine samples posted as JSON."""

from streamflow.streamlets.io import HttpIngress

WineIngress = HttpIngress.for_schema("examples.wine.WineSample", name="WineIngress")
