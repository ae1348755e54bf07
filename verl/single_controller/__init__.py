"""The single controller: one driver calls a method on a worker group; the call is split across ranks, run, and
gathered. `base` holds the engine-independent pieces (Worker, WorkerGroup, @register); `ray` runs them on Ray."""
