package publish

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// On-disk record format of a spool segment, all integers big-endian:
//
//	uint32 payload length | uint32 CRC-32C of the payload | payload
//	payload = uint16 subject length | subject | uint16 msg-id length | msg-id | event JSON
//
// The CRC covers the whole payload, so a record cut short by a crash or flipped by a bad disk is
// recognised and never replayed as a garbled event.

const (
	recordHeaderBytes = 8
	// maxRecordBytes bounds one record's payload: an event (schema.MaxEventBytes) plus subject and
	// id. A length above it can only come from corruption.
	maxRecordBytes = 1<<20 + 2*(1<<16)
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// record is one event as it is sent to JetStream.
type record struct {
	subject string
	msgID   string
	data    []byte
}

// size is the number of bytes the record takes in a segment.
func (r *record) size() int64 {
	return int64(recordHeaderBytes + 4 + len(r.subject) + len(r.msgID) + len(r.data))
}

// appendRecord appends r's on-disk encoding to buf.
func appendRecord(buf []byte, r *record) ([]byte, error) {
	if len(r.subject) > 0xFFFF || len(r.msgID) > 0xFFFF {
		return buf, fmt.Errorf("spool record: subject (%d bytes) or msg id (%d bytes) over 65535 bytes", len(r.subject), len(r.msgID))
	}
	n := 4 + len(r.subject) + len(r.msgID) + len(r.data)
	if n > maxRecordBytes {
		return buf, fmt.Errorf("spool record: %d bytes, over the limit of %d", n, maxRecordBytes)
	}
	start := len(buf)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	buf = binary.BigEndian.AppendUint32(buf, 0) // CRC, filled below
	payload := len(buf)
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(r.subject)))
	buf = append(buf, r.subject...)
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(r.msgID)))
	buf = append(buf, r.msgID...)
	buf = append(buf, r.data...)
	binary.BigEndian.PutUint32(buf[start+4:], crc32.Checksum(buf[payload:], crcTable))
	return buf, nil
}

// errTruncated means the input ended inside a record: the tail of a segment written by a process
// that died mid-append.
var errTruncated = errors.New("record truncated")

// errCorrupt means a record's length or checksum is wrong.
var errCorrupt = errors.New("record corrupt")

// recordReader reads records from a segment.
type recordReader struct {
	r   io.Reader
	hdr [recordHeaderBytes]byte
	buf []byte
}

// next returns the next record and its size on disk. It returns io.EOF at a clean end,
// errTruncated when the input ends inside a record, and errCorrupt for a bad length or checksum.
// The returned record's data is valid until the next call.
func (rr *recordReader) next() (record, int64, error) {
	if _, err := io.ReadFull(rr.r, rr.hdr[:]); err != nil {
		if err == io.EOF {
			return record{}, 0, io.EOF
		}
		if err == io.ErrUnexpectedEOF {
			return record{}, 0, errTruncated
		}
		return record{}, 0, fmt.Errorf("read spool record header: %w", err)
	}
	n := binary.BigEndian.Uint32(rr.hdr[0:4])
	sum := binary.BigEndian.Uint32(rr.hdr[4:8])
	if n < 4 || n > maxRecordBytes {
		return record{}, 0, fmt.Errorf("%w: payload length %d", errCorrupt, n)
	}
	if cap(rr.buf) < int(n) {
		rr.buf = make([]byte, n)
	}
	p := rr.buf[:n]
	if _, err := io.ReadFull(rr.r, p); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return record{}, 0, errTruncated
		}
		return record{}, 0, fmt.Errorf("read spool record payload: %w", err)
	}
	if crc32.Checksum(p, crcTable) != sum {
		return record{}, 0, fmt.Errorf("%w: checksum mismatch", errCorrupt)
	}
	rec, err := decodePayload(p)
	if err != nil {
		return record{}, 0, err
	}
	return rec, int64(recordHeaderBytes) + int64(n), nil
}

func decodePayload(p []byte) (record, error) {
	sl := int(binary.BigEndian.Uint16(p))
	p = p[2:]
	if len(p) < sl+2 {
		return record{}, fmt.Errorf("%w: subject length %d beyond payload", errCorrupt, sl)
	}
	subject := string(p[:sl])
	p = p[sl:]
	il := int(binary.BigEndian.Uint16(p))
	p = p[2:]
	if len(p) < il {
		return record{}, fmt.Errorf("%w: msg id length %d beyond payload", errCorrupt, il)
	}
	return record{subject: subject, msgID: string(p[:il]), data: p[il:]}, nil
}
