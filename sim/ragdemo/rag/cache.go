package rag

import (
	"container/list"
	"sync"
)

// answerCache is a small exact-match LRU of answers by normalised question.
type answerCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recent; values are *cacheEntry
	byKey map[string]*list.Element
}

type cacheEntry struct {
	key    string
	answer Answer
}

func newAnswerCache(max int) *answerCache {
	return &answerCache{max: max, order: list.New(), byKey: map[string]*list.Element{}}
}

func (c *answerCache) get(key string) (Answer, bool) {
	if c.max <= 0 {
		return Answer{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return Answer{}, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cacheEntry).answer, true
}

func (c *answerCache) put(key string, a Answer) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		el.Value.(*cacheEntry).answer = a
		c.order.MoveToFront(el)
		return
	}
	c.byKey[key] = c.order.PushFront(&cacheEntry{key: key, answer: a})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cacheEntry).key)
	}
}
