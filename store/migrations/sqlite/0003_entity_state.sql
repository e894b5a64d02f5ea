-- The state of everything at any instant (StateAt): each event that records
-- an entity's state (an endpoint, a pod's readiness, a container, a Service
-- ...; see event.Event.Entity) carries its entity key, and the newest such
-- event at or before an instant is one probe of events_entity_ts. entities
-- lists every key once, so that StateAt walks the entities, not the
-- history: its cost does not grow with the days stored. Events stored
-- before this migration have no key; the watcher's periodic re-observation
-- records every current state again within minutes.
ALTER TABLE events ADD COLUMN entity TEXT;
CREATE INDEX events_entity_ts ON events (entity, ts) WHERE entity IS NOT NULL;

CREATE TABLE entities (
    entity    TEXT    PRIMARY KEY,
    namespace TEXT    NOT NULL,
    first_ts  INTEGER NOT NULL,
    last_ts   INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX entities_namespace ON entities (namespace);
