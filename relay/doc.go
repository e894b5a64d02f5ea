// Package relay carries agents' events to the server. The server then holds
// the only database pool and an agent can write only its own node's events:
// Handler, mounted by drainscope serve, authenticates each agent by its pod's
// projected service account token (TokenReviewer, through the TokenReview API,
// which names the node the token is bound to) and refuses events of any other
// node; Client, the agent's side, is a store.Store that posts batches to it.
package relay
