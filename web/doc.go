// Package web serves drainscope's browser UI and its JSON API. They show the
// list of recent rollouts with failures counted by cause, a timeline per
// rollout that puts every pod (old and new) on one time axis with the
// deletion, endpoint changes, preStop, SIGTERM, listener close, socket closes
// and resets, exit, SIGKILL and the client failures colour-coded by cause, and
// an alignment view with the failure offsets from SIGTERM and from exit and
// the per-cause evidence and fix.
//
// Everything a page shows comes from /api/v1 (documented in API.md). A
// rollout is read from the store once, in one scan shared by the analysis
// and a compact per-pod index, and kept in a small cache; requests for any
// time range are then answered from memory and aggregated into density bins
// beyond a budget, so the browser never receives more marks than it can
// draw. Pages are html/template over embedded files; the timeline is plain
// SVG drawn by one embedded script; no asset comes from anywhere else.
package web
