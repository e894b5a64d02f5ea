// Package deploy holds drainscope's deployment material. That is the Helm
// chart (helm/drainscope), the kustomize base with its components and overlays
// (kustomize/), the container image's Dockerfile, and the kubectl plugin's
// krew manifest (plugin.yaml, a template scripts/krew-release.sh fills). It
// has no Go code; its tests lint and render the chart with helm, apply every
// rendering and overlay with kubectl apply --dry-run=server against a real
// kube-apiserver, check that the alert rules name metrics drainscope exposes,
// and build a release of the plugin from the manifest.
package deploy
