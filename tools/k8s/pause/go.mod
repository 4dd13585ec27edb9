// The pod sandbox ("pause") program of the real test node: the image cannot be
// pulled here, so tools/k8s/node-setup builds it from this module.
module streamflow/tools/k8s/pause

go 1.26.0
