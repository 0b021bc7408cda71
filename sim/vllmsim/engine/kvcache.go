package engine

import "container/list"

// kvCache accounts KV blocks the way vLLM's block pool does, at block granularity: blocks held
// privately by running sequences, and full prompt blocks shared through the prefix cache and
// reference-counted. A cached block that no running sequence holds is free (evictable, LRU) but
// keeps its content until evicted, which is how a repeated prompt finds its prefix. Usage counts
// only blocks held by running sequences, as vllm:kv_cache_usage_perc does.
type kvCache struct {
	blockSize   int
	total       int
	entries     map[uint64]*cacheEntry
	lru         *list.List // *cacheEntry with refs == 0, front = least recently used
	private     int        // blocks held privately by running sequences
	sharedInUse int        // cache entries with refs > 0
}

type cacheEntry struct {
	hash uint64
	refs int
	elem *list.Element
}

func newKVCache(totalTokens, blockSize int) *kvCache {
	return &kvCache{
		blockSize: blockSize,
		total:     max(1, totalTokens/blockSize),
		entries:   map[uint64]*cacheEntry{},
		lru:       list.New(),
	}
}

func (k *kvCache) used() int { return k.private + k.sharedInUse }

func (k *kvCache) free() int { return k.total - k.used() }

func (k *kvCache) usage() float64 { return float64(k.used()) / float64(k.total) }

func (k *kvCache) blocksFor(tokens int) int { return (tokens + k.blockSize - 1) / k.blockSize }

// hits is the number of leading hashes present in the cache.
func (k *kvCache) hits(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if _, ok := k.entries[h]; !ok {
			break
		}
		n++
	}
	return n
}

// freeCost is how many free blocks acquiring hashes would consume: cached entries nobody holds.
func (k *kvCache) freeCost(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if e, ok := k.entries[h]; ok && e.refs == 0 {
			n++
		}
	}
	return n
}

// acquire takes a reference on the block with hash h, creating it (from a free block) when absent.
// The caller has checked there is room.
func (k *kvCache) acquire(h uint64) {
	e, ok := k.entries[h]
	if !ok {
		k.makeRoom(1)
		e = &cacheEntry{hash: h}
		k.entries[h] = e
	}
	if e.refs == 0 {
		if e.elem != nil {
			k.lru.Remove(e.elem)
			e.elem = nil
		}
		k.sharedInUse++
	}
	e.refs++
}

func (k *kvCache) release(h uint64) {
	e, ok := k.entries[h]
	if !ok || e.refs == 0 {
		return
	}
	e.refs--
	if e.refs == 0 {
		k.sharedInUse--
		e.elem = k.lru.PushBack(e)
	}
}

// allocPrivate takes n blocks for a sequence's private use. The caller has checked free() >= n.
func (k *kvCache) allocPrivate(n int) {
	k.makeRoom(n)
	k.private += n
}

func (k *kvCache) freePrivate(n int) { k.private -= n }

// makeRoom evicts least recently used unreferenced cache entries until n more blocks fit beside
// everything stored (held and cached).
func (k *kvCache) makeRoom(n int) {
	for len(k.entries)+k.private+n > k.total && k.lru.Len() > 0 {
		e := k.lru.Remove(k.lru.Front()).(*cacheEntry)
		delete(k.entries, e.hash)
	}
}

// blockHashes chains a hash over each full block of ids, so equal hashes mean equal prefixes.
func blockHashes(ids []int, blockSize int) []uint64 {
	n := len(ids) / blockSize
	out := make([]uint64, n)
	h := uint64(14695981039346656037)
	for b := 0; b < n; b++ {
		for _, id := range ids[b*blockSize : (b+1)*blockSize] {
			v := uint64(id)
			for i := 0; i < 4; i++ {
				h ^= v & 0xff
				h *= 1099511628211
				v >>= 8
			}
		}
		out[b] = h
	}
	return out
}
