package sink

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Class is what the consumer does about an insert that was not accepted. The package
// documentation lists the ClickHouse exception codes of each class.
type Class uint8

const (
	// Retry: ClickHouse is unreachable, overloaded, shutting down, or not set up for the insert
	// (a table, column or grant missing); the same insert is accepted once that passes or is
	// fixed. The batch is retried unchanged, with backoff, without limit.
	Retry Class = iota + 1
	// Split: the batch is refused for its shape, not for a row (more partitions in one block than
	// max_partitions_per_insert_block); each half of it is accepted or refused on its own.
	Split
	// Refuse: a row of the batch holds a value ClickHouse will never accept (a parse, type,
	// range or constraint error); that row is dead-lettered and the others are inserted.
	Refuse
	// Unknown: an exception code not listed here. It is retried like Retry a bounded number of
	// times, then handled like Refuse, so nothing is retried forever.
	Unknown
)

func (c Class) String() string {
	switch c {
	case Retry:
		return "retry"
	case Split:
		return "split"
	case Refuse:
		return "refuse"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// code is one ClickHouse exception code: its name as system.errors spells it and its class.
type code struct {
	name  string
	class Class
}

// exceptionCodes is the class of every ClickHouse exception code the consumer knows an insert
// can end with (names as in system.errors of ClickHouse 26.7). The package documentation repeats
// this table; TestCodeTableMatchesDoc keeps the two equal and TestCodeNamesMatchServer checks
// the names against the server.
var exceptionCodes = map[int32]code{
	// The server is unavailable or overloaded, or the connection broke mid-insert.
	3:   {"UNEXPECTED_END_OF_FILE", Retry},
	32:  {"ATTEMPT_TO_READ_AFTER_EOF", Retry},
	159: {"TIMEOUT_EXCEEDED", Retry},
	160: {"TOO_SLOW", Retry},
	164: {"READONLY", Retry},
	173: {"CANNOT_ALLOCATE_MEMORY", Retry},
	202: {"TOO_MANY_SIMULTANEOUS_QUERIES", Retry},
	203: {"NO_FREE_CONNECTION", Retry},
	209: {"SOCKET_TIMEOUT", Retry},
	210: {"NETWORK_ERROR", Retry},
	218: {"TABLE_IS_DROPPED", Retry},
	236: {"ABORTED", Retry},
	241: {"MEMORY_LIMIT_EXCEEDED", Retry},
	242: {"TABLE_IS_READ_ONLY", Retry},
	243: {"NOT_ENOUGH_SPACE", Retry},
	252: {"TOO_MANY_PARTS", Retry}, // Split when the message is about one INSERT block
	// A synchronous insert into a Distributed table whose target shard is down (no replica
	// answers): the shard's outage, not the rows.
	279: {"ALL_CONNECTION_TRIES_FAILED", Retry},
	285: {"TOO_FEW_LIVE_REPLICAS", Retry},
	319: {"UNKNOWN_STATUS_OF_INSERT", Retry},
	394: {"QUERY_WAS_CANCELLED", Retry},
	425: {"SYSTEM_ERROR", Retry},
	439: {"CANNOT_SCHEDULE_TASK", Retry},
	473: {"DEADLOCK_AVOIDED", Retry},
	733: {"TABLE_IS_BEING_RESTARTED", Retry},
	745: {"SERVER_OVERLOADED", Retry},
	749: {"TCP_CONNECTION_LIMIT_REACHED", Retry},
	999: {"KEEPER_EXCEPTION", Retry},
	// Not set up for the insert: an operator fixes it (`servescope migrate up`, grants), and
	// until then every row would fail alike, so rows are kept rather than dead-lettered.
	16:  {"NO_SUCH_COLUMN_IN_TABLE", Retry},
	60:  {"UNKNOWN_TABLE", Retry},
	81:  {"UNKNOWN_DATABASE", Retry},
	192: {"UNKNOWN_USER", Retry},
	201: {"QUOTA_EXCEEDED", Retry},
	291: {"DATABASE_ACCESS_DENIED", Retry},
	497: {"ACCESS_DENIED", Retry},
	516: {"AUTHENTICATION_FAILED", Retry},
	// A value of a row is refused.
	6:   {"CANNOT_PARSE_TEXT", Refuse},
	27:  {"CANNOT_PARSE_INPUT_ASSERTION_FAILED", Refuse},
	38:  {"CANNOT_PARSE_DATE", Refuse},
	41:  {"CANNOT_PARSE_DATETIME", Refuse},
	53:  {"TYPE_MISMATCH", Refuse},
	69:  {"ARGUMENT_OUT_OF_BOUND", Refuse},
	70:  {"CANNOT_CONVERT_TYPE", Refuse},
	72:  {"CANNOT_PARSE_NUMBER", Refuse},
	117: {"INCORRECT_DATA", Refuse},
	131: {"TOO_LARGE_STRING_SIZE", Refuse},
	190: {"SIZES_OF_ARRAYS_DONT_MATCH", Refuse},
	321: {"VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE", Refuse},
	349: {"CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN", Refuse},
	376: {"CANNOT_PARSE_UUID", Refuse},
	395: {"FUNCTION_THROW_IF_VALUE_IS_NON_ZERO", Refuse},
	407: {"DECIMAL_OVERFLOW", Refuse},
	467: {"CANNOT_PARSE_BOOL", Refuse},
	469: {"VIOLATED_CONSTRAINT", Refuse},
	691: {"UNKNOWN_ELEMENT_OF_ENUM", Refuse},
}

// tooManyPartitions starts the message of code 252 that refuses one INSERT block spanning more
// partitions than max_partitions_per_insert_block (MergeTreeDataWriter::splitBlockIntoParts);
// the other messages of code 252 ("Too many parts ...") mean merges are behind: Retry.
const tooManyPartitions = "Too many partitions for single INSERT block"

// Verdict is the classification of an insert error.
type Verdict struct {
	Class Class
	// Code and Name identify the ClickHouse exception; 0 and "" when there was none.
	Code int32
	Name string
	// Message is ClickHouse's own message (or the client's, when it refused rows before
	// sending), without the exception's code.
	Message string
	// Rows is set when the sink found the refused rows itself ([RowsError]): their indexes in
	// the batch, in order, with Reasons[i] the reason of Rows[i]. Nil when ClickHouse refused
	// the batch as a whole, without saying which row.
	Rows    []int
	Reasons []string
	// Row is the row ClickHouse points at ("… at row N" in its message, as for 469
	// VIOLATED_CONSTRAINT), 0-based, or -1. It is a hint: the caller confirms it by inserting
	// that row alone.
	Row int
}

// atRow finds ClickHouse's 1-based "at row N" in an exception's message.
var atRow = regexp.MustCompile(`\bat row (\d+)\b`)

// Reason is the refusal as recorded with a dead-lettered row: "ClickHouse refused the row:
// code 469 VIOLATED_CONSTRAINT: Constraint `c` for table … is violated …".
func (v Verdict) Reason() string {
	if v.Code == 0 {
		return "ClickHouse refused the row: " + v.Message
	}
	return fmt.Sprintf("ClickHouse refused the row: code %d %s: %s", v.Code, v.Name, v.Message)
}

// Classify sorts an error of [Sink.InsertEvents] or [Sink.InsertErrors]. A ClickHouse exception
// is classed by its code (the package documentation's table; codes not listed are Unknown). A
// [RowsError] is Refuse with its rows. Any other error carries no word from the server about the
// data — a refused or reset connection, EOF, a timeout, an exhausted pool — and is Retry.
func Classify(err error) Verdict {
	var re *RowsError
	if errors.As(err, &re) {
		v := Verdict{Class: Refuse, Message: re.Error(), Rows: make([]int, len(re.Rows)), Reasons: make([]string, len(re.Rows)), Row: -1}
		for i, r := range re.Rows {
			v.Rows[i], v.Reasons[i] = r.Index, r.Reason
		}
		return v
	}
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return Verdict{Class: Retry, Message: err.Error(), Row: -1}
	}
	v := Verdict{Class: Unknown, Code: ex.Code, Name: "unknown code", Message: ex.Message, Row: -1}
	if c, ok := exceptionCodes[ex.Code]; ok {
		v.Class, v.Name = c.class, c.name
	}
	if m := atRow.FindStringSubmatch(ex.Message); m != nil && v.Class == Refuse {
		if n, err := strconv.Atoi(m[1]); err == nil && n >= 1 {
			v.Row = n - 1
		}
	}
	if ex.Code == 252 && strings.HasPrefix(ex.Message, tooManyPartitions) {
		v.Class = Split
	}
	return v
}

// RowsError is returned when rows of a batch would not be stored as sent: the client cannot
// encode them into the columns as the server declares them (a column's type changed under the
// consumer, a value outside an Enum), or they are older than the table's TTL, which ClickHouse
// applies at insert by dropping them silently ([Retention]). Nothing was sent, and every other
// row of the batch can be.
type RowsError struct {
	Table string
	Rows  []RowError
}

// RowError is one row set aside.
type RowError struct {
	// Index is the row's position in the batch.
	Index int
	// Reason says why, naming the column and its type, or the TTL.
	Reason string
}

func (e *RowsError) Error() string {
	if len(e.Rows) == 0 {
		return "insert into " + e.Table + ": rows refused"
	}
	r := e.Rows[0]
	return fmt.Sprintf("insert into %s: %d rows refused before sending, the first (row %d): %s", e.Table, len(e.Rows), r.Index, r.Reason)
}
