package metrics

// ExportObserver returns the callback export.Options.Observe takes, which
// counts drainscope_export_disruptions_total{sink, outcome}: each
// disruption handed to a sink (Kubernetes Events, OTLP) and how it went
// (delivered, deferred by a rate limit, failed, expired undelivered). Call
// it once.
func (m *Metrics) ExportObserver() func(sink, outcome string) {
	c := factory{m}.counterVec("export_disruptions_total",
		"Finished disruptions handed to each export sink (events, otlp), by outcome: delivered, deferred (a rate limit), failed (retried), expired (given up, still undelivered).",
		"sink", "outcome")
	return func(sink, outcome string) { c.WithLabelValues(sink, outcome).Inc() }
}
