package container

import (
	"sync"
	"sync/atomic"
)

// Singleton is the process-wide container the C ABI serves: empty until
// Init, then fixed for the life of the process (as the native one, it is
// never torn down). The zero Singleton is ready to use.
type Singleton struct {
	mu     sync.Mutex
	c      atomic.Pointer[Container]
	opts   []Option
	fanout Fanout
	drop   HostDropFunc
	uncnt  UncountedRefs
}

// SetUncountedRefs sets where the host keeps uncounted references, now if
// the container exists and at Init otherwise.
func (s *Singleton) SetUncountedRefs(u UncountedRefs) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uncnt = u
	if c := s.c.Load(); c != nil {
		c.SetUncountedRefs(u)
	}
}

// SetHostDrop sets what runs hosts' drop functions, now if the container
// exists and at Init otherwise, so that no record dies without it.
func (s *Singleton) SetHostDrop(f HostDropFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop = f
	if c := s.c.Load(); c != nil {
		c.SetHostDrop(f)
	}
}

// SetFanout sets who the container tells about releases, now if it exists
// and at Init otherwise (the host may wire its RPC before it calls Init).
func (s *Singleton) SetFanout(n Fanout) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fanout = n
	if c := s.c.Load(); c != nil {
		c.SetFanout(n)
	}
}

// Get returns the container, or the native "Need to initialize" error.
func (s *Singleton) Get() (*Container, error) {
	if c := s.c.Load(); c != nil {
		return c, nil
	}
	return nil, errNotInitialized
}

// SetOptions sets the options that Init passes to New; calls after Init have
// no effect.
func (s *Singleton) SetOptions(opts ...Option) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts = opts
}

// Init creates the container for workerID on the first call; later calls
// with the same id are no-ops. It reproduces the native check exactly: the
// native container stores the worker id as an int16_t and compares it with
// the int64 argument, so for worker ids >= 32768 every second Init fails,
// even with the same id ("... worker_id: -25536, cannot initialize with
// different worker_id: 40000"). Callers and tests match on that behaviour.
func (s *Singleton) Init(workerID int64) (*Container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if workerID < 0 || workerID > MaxWorkerID {
		return nil, errWorkerRange
	}
	if c := s.c.Load(); c != nil {
		if int64(c.worker) != workerID {
			return nil, errAlreadyInit(c.worker, workerID)
		}
		return c, nil
	}
	c, err := New(workerID, s.opts...)
	if err != nil {
		return nil, err
	}
	c.SetFanout(s.fanout)
	c.SetHostDrop(s.drop)
	c.SetUncountedRefs(s.uncnt)
	s.c.Store(c)
	return c, nil
}
