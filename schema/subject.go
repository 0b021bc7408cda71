package schema

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the subject prefix of a default deployment: events are published on
// "servescope.v1.<kind>" and dead letters on "servescope.dlq.<kind>".
const DefaultPrefix = "servescope"

// Subject returns the default subject of kind k, e.g. "servescope.v1.request.finished".
func Subject(k Kind) string { return SubjectWithPrefix(DefaultPrefix, k) }

// SubjectWithPrefix returns "<prefix>.v1.<kind>"; tests and multi-tenant deployments use their
// own prefix to keep their events apart.
func SubjectWithPrefix(prefix string, k Kind) string { return prefix + "." + Version + "." + string(k) }

// KindFromSubject returns the kind a subject carries: whatever follows the first ".v1." segment,
// so it works with any prefix. It fails for a subject of another version or an unknown kind.
func KindFromSubject(subject string) (Kind, error) {
	marker := "." + Version + "."
	i := strings.Index(subject, marker)
	if i < 0 {
		return "", fmt.Errorf("subject %q: not a servescope %s subject (want <prefix>.%s.<kind>)", subject, Version, Version)
	}
	k := Kind(subject[i+len(marker):])
	if !k.Valid() {
		return "", fmt.Errorf("subject %q: unknown event kind %q", subject, k)
	}
	return k, nil
}

// MsgID returns the value to put in the message's Nats-Msg-Id header: the event_id, so that
// JetStream de-duplicates a publish retried within the stream's duplicate window.
func MsgID(e Event) string { return e.Head().EventID }
