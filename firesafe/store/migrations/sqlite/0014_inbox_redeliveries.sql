-- Redeliveries of an event are duplicates, counted on its row (invariant 1: one event per (source,
-- event id)). A provider updates some fields between its retries (Stripe's pending_webhooks), so a
-- redelivery's data may differ from the stored event's: such a delivery is counted in `changed`, and
-- the last one's fingerprint, data and time are kept for review (firesafe events show).
ALTER TABLE firesafe_inbox_events ADD COLUMN redeliveries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE firesafe_inbox_events ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE firesafe_inbox_events ADD COLUMN changed_at REAL;
ALTER TABLE firesafe_inbox_events ADD COLUMN changed_fingerprint TEXT;
ALTER TABLE firesafe_inbox_events ADD COLUMN changed_data TEXT;
