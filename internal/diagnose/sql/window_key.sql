{{- /* The windows of a range a row's time (the column named by the dot) falls in, for reads by
window (windows.go): window k is [from + k × hop, from + k × hop + win), k from 0 to last_k; the
row is repeated once per window holding it (arrayJoin), so a windowed read groups by k and keeps
the same aggregates as its read of the whole range. */ -}}
arrayJoin(range(
    toUInt64(greatest(0, toInt64(floor((toUnixTimestamp64Micro({{.}}) - {from_us:Int64} - {win_us:Int64}) / {hop_us:Int64})) + 1)),
    toUInt64(greatest(0, least({last_k:Int64}, toInt64(floor((toUnixTimestamp64Micro({{.}}) - {from_us:Int64}) / {hop_us:Int64}))) + 1))))
