// Package deploy holds the sweeper's Grafana dashboard (grafana-dashboard.json),
// its Prometheus alert rules (alerts.yml) and the Kubernetes manifests
// (kubernetes/, docs/kubernetes.md). Its tests check that every metric the
// dashboard and the rules use is one the sweeper exports, and build each
// kustomization, decode every object strictly into the Kubernetes API types
// and check it against the binaries' flags, variables and endpoints.
package deploy
