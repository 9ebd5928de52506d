// Package deploy holds the sweeper's Grafana dashboard (grafana-dashboard.json)
// and Prometheus alert rules (alerts.yml); its test checks that every metric
// they use is one the sweeper exports.
package deploy
