package publish

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzRecordReader feeds arbitrary segment bytes to the spool's record reader: it must never
// panic, must classify every failure as truncated, corrupt or EOF, and every record it accepts
// must re-encode to the exact bytes it was read from.
func FuzzRecordReader(f *testing.F) {
	good, _ := appendRecord(nil, &record{subject: "servescope.v1.app.record", msgID: "abc", data: []byte(`{"x":1}`)})
	two, _ := appendRecord(append([]byte(nil), good...), &record{subject: "s", msgID: "", data: nil})
	f.Add(good)
	f.Add(two)
	f.Add(good[:len(good)-1])
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		rr := &recordReader{r: bytes.NewReader(in)}
		var off int64
		for {
			r, n, err := rr.next()
			if err == io.EOF {
				if off != int64(len(in)) {
					t.Fatalf("EOF at %d of %d bytes", off, len(in))
				}
				return
			}
			if err != nil {
				if !errors.Is(err, errTruncated) && !errors.Is(err, errCorrupt) {
					t.Fatalf("unexpected error class: %v", err)
				}
				return
			}
			re, encErr := appendRecord(nil, &r)
			if encErr != nil {
				t.Fatalf("accepted record does not re-encode: %v", encErr)
			}
			if !bytes.Equal(re, in[off:off+n]) {
				t.Fatalf("record at %d re-encodes differently", off)
			}
			off += n
		}
	})
}
