ALTER TABLE alert_deliveries DROP COLUMN IF EXISTS starts_at, DROP COLUMN IF EXISTS statuses;
