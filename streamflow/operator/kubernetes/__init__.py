"""The Kubernetes target: a kopf operator for the StreamflowApplication resource.

``crd`` defines the resource; ``spec`` reads it into the Application model;
``resources`` builds each streamlet's Deployment, ConfigMap and Service;
``executor`` and ``reconcile`` apply the pure planner's actions; ``status``
computes what the resource reports; ``handlers`` and ``runner`` wire it all to
kopf; ``target`` is what ``--target kubernetes`` in the CLI calls. Importing
this package needs the ``k8s`` extra (kopf and kubernetes).
"""
