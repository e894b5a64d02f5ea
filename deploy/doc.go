// Package deploy holds drainscope's deployment material: the Helm chart
// (helm/drainscope), the kustomize base with its components and overlays
// (kustomize/), and the container image's Dockerfile. It has no Go code;
// its tests lint and render the chart with helm, apply every rendering and
// overlay with kubectl apply --dry-run=server against a real
// kube-apiserver, and check that the alert rules name metrics drainscope
// exposes.
package deploy
