package server

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnstore/cairn/internal/wire"
)

// MetricPrefix starts the name of every metric of cairnd.
const MetricPrefix = "cairnd_"

// metrics is a Connect interceptor that counts each request by procedure
// and result code ("ok" or the Connect code) and observes its latency.
type metrics struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPrefix + "requests_total",
			Help: "Requests by procedure and result: ok or the Connect error code.",
		}, []string{"procedure", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPrefix + "contract_errors_total",
			Help: "Requests that failed with an error of the contract, by procedure and upstream code (SANDBOX_SNAPSHOT_...), or unknown_outcome.",
		}, []string{"procedure", "upstream_code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricPrefix + "request_duration_seconds",
			Help:    "Time from the request's arrival to its response (for streams: to its end), by procedure.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"procedure"}),
	}
	if r != nil {
		r.MustRegister(m.requests, m.errors, m.latency)
	}
	return m
}

func (m *metrics) observe(procedure string, start time.Time, err error) {
	m.latency.WithLabelValues(procedure).Observe(time.Since(start).Seconds())
	if err == nil {
		m.requests.WithLabelValues(procedure, "ok").Inc()
		return
	}
	m.requests.WithLabelValues(procedure, connect.CodeOf(err).String()).Inc()
	if ce, ok := err.(*connect.Error); ok {
		if d := wire.Detail(ce); d != nil {
			switch {
			case d.UnknownOutcome:
				m.errors.WithLabelValues(procedure, "unknown_outcome").Inc()
			case d.Code != "":
				m.errors.WithLabelValues(procedure, d.Code).Inc()
			}
		}
	}
}

func (m *metrics) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		res, err := next(ctx, req)
		m.observe(req.Spec().Procedure, start, err)
		return res, err
	}
}

func (m *metrics) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (m *metrics) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		m.observe(conn.Spec().Procedure, start, err)
		return err
	}
}
