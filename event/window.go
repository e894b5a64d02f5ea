package event

// Window is a half-open time range [From, To) in UTC nanoseconds. A zero To
// means "until now and beyond".
type Window struct {
	From int64
	To   int64
}

// Contains reports whether t lies in the window.
func (w Window) Contains(t int64) bool {
	return t >= w.From && (w.To == 0 || t < w.To)
}
