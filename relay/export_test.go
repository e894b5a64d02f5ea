package relay

// Queued is how many batches wait for a store write, for tests.
func (h *Handler) Queued() int {
	h.qmu.Lock()
	defer h.qmu.Unlock()
	return len(h.queue)
}
