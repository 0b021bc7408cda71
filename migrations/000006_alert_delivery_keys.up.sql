-- Each delivery row names the state changes it carried, one entry per alert and parallel to
-- fingerprints: statuses holds each alert's own status (a message whose status is firing can also
-- carry resolved alerts) and starts_at each alert's startsAt. Fingerprint, status and startsAt are
-- the key a receiver de-duplicates by, and the key by which the detector finds, when it starts, the
-- state changes a receiver has not accepted yet. Rows written before this migration hold empty arrays.
ALTER TABLE alert_deliveries
    ADD COLUMN IF NOT EXISTS statuses Array(LowCardinality(String)) AFTER fingerprints,
    ADD COLUMN IF NOT EXISTS starts_at Array(DateTime64(6, 'UTC')) AFTER statuses;
