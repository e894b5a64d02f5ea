-- The state of everything at any instant (StateAt): each event that records
-- an entity's state (an endpoint, a pod's readiness, a container, a Service
-- ...; see event.Event.Entity) carries its entity key, and the newest such
-- event at or before an instant is one probe of events_entity_ts in the
-- newest day partition that holds one. entities lists every key once, with
-- its first and last times, so that StateAt walks the entities, not the
-- history or the partitions: its cost does not grow with the days stored.
-- Events stored before this migration have no key; the watcher's periodic
-- re-observation records every current state again within minutes.
ALTER TABLE events ADD COLUMN entity text;
CREATE INDEX events_entity_ts ON events (entity, ts, id) WHERE entity IS NOT NULL;
-- The template of a retried batch's temporary table (roles.go) follows.
ALTER TABLE IF EXISTS events_shape ADD COLUMN IF NOT EXISTS entity text;

CREATE TABLE entities (
    entity    text   PRIMARY KEY,
    namespace text   NOT NULL,
    first_ts  bigint NOT NULL,
    last_ts   bigint NOT NULL
);
CREATE INDEX entities_namespace ON entities (namespace);
