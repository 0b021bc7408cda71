-- The application's top-passage retrieval scores of one window. Records that name no model are
-- kept under --model, since many applications do not set it.
SELECT {{if .}}{{template "window_key.sql" "ts"}} AS k, {{end}}count() AS n, quantileOrNull(0.5)(retrieval_top_score) AS top_p50
FROM ({{template "retrieval_rows.sql"}})
{{- if .}}
GROUP BY k
{{- end}}
