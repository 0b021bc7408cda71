ALTER TABLE requests
    DROP COLUMN IF EXISTS trace_sampled,
    DROP COLUMN IF EXISTS response_id,
    DROP COLUMN IF EXISTS finish_reasons;
