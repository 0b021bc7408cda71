-- Share of answers with letters outside the allowed scripts, per request: the gateway's check
-- and the application's check are merged, and either one finding a violation counts. Above the
-- sample's bound both counts are estimates (the sample's times sample_m); the share is the sample's.
SELECT {{if .}}{{template "window_key.sql" "ts"}} AS k, {{end}}toUInt64(count() * any(m)) AS checked, toUInt64(countIf(violation) * any(m)) AS violations, toUInt64(any(m)) AS sample_factor
FROM ({{template "script_rows.sql"}})
{{- if .}}
GROUP BY k
{{- end}}
