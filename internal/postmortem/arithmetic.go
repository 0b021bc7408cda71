package postmortem

import (
	"fmt"
	"math"
)

// Sizes of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).
const (
	minBlockSize  = 512      // every request is rounded up to this
	smallSize     = 1 << 20  // requests up to this come from a 2 MiB buffer
	smallBuffer   = 2 << 20  // the buffer for small requests
	minLargeAlloc = 10 << 20 // requests below this come from a 20 MiB buffer
	largeBuffer   = 20 << 20 // the buffer for mid-sized requests
	roundLarge    = 2 << 20  // larger requests are rounded up to a multiple of this
)

// AllocationSize is the block PyTorch's caching allocator asks CUDA for when a tensor of n bytes
// does not fit in its cache; "Tried to allocate" prints this size, which is why
// 193 × 152,064 × 4 = 117,393,408 B (111.95 MiB) reads "112.00 MiB".
func AllocationSize(n int64) int64 {
	if n < minBlockSize {
		n = minBlockSize
	} else {
		n = (n + minBlockSize - 1) / minBlockSize * minBlockSize
	}
	switch {
	case n <= smallSize:
		return smallBuffer
	case n < minLargeAlloc:
		return largeBuffer
	default:
		return (n + roundLarge - 1) / roundLarge * roundLarge
	}
}

// FormatSize prints a byte count the way PyTorch's format_size does ("112.00 MiB").
func FormatSize(n int64) string {
	switch {
	case n <= 1024:
		return fmt.Sprintf("%d bytes", n)
	case n <= 1<<20:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	case n <= 1<<30:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// printedUnit is the unit PyTorch printed a size in (format_size picks it from the size), and so
// half the last printed digit: the parsed byte count is only known to ± that much.
func printedUnit(n int64) (unit float64, halfDigit float64) {
	switch {
	case n <= 1024:
		return 1, 0
	case n <= 1<<20:
		return 1 << 10, 0.005 * (1 << 10)
	case n <= 1<<30:
		return 1 << 20, 0.005 * (1 << 20)
	}
	return 1 << 30, 0.005 * (1 << 30)
}

// TensorRange is the range of tensor sizes, in bytes, that PyTorch reports as "Tried to allocate
// printed": the printed value is rounded to two decimals of its unit, and it is either the tensor's
// own size or the allocator's rounded block (up to one 2 MiB step more; the 2 MiB and 20 MiB
// buffers of small requests can stand for any smaller tensor). Both readings are accepted, since
// PyTorch releases differ in which one they print.
func TensorRange(printed int64) (lo, hi float64) {
	_, half := printedUnit(printed)
	hi = float64(printed) + half
	lo = float64(printed) - half
	switch {
	case lo <= largeBuffer:
		lo = 0
	default:
		lo -= roundLarge
	}
	if lo < 0 {
		lo = 0
	}
	return lo, hi
}

// ImpliedRunning is the range of row counts (running sequences) whose tensor of rowBytes per row
// PyTorch would report as printed bytes. ok is false when no count fits.
func ImpliedRunning(printed, rowBytes int64) (minN, maxN int, ok bool) {
	if rowBytes <= 0 {
		return 0, 0, false
	}
	row := float64(rowBytes)
	lo, hi := TensorRange(printed)
	minN = int(math.Ceil(lo / row))
	if minN < 1 {
		minN = 1
	}
	maxN = int(math.Floor(hi / row))
	return minN, maxN, maxN >= minN
}
