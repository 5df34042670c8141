//! The JSON of `GET /stats` in one place, so that it can be read against the table in
//! docs/observability.md field by field.

use npu::memory::PoolStats;
use serde_json::json;

use crate::model::Model;
use crate::state::AppState;

impl Model {
    /// The device-side statistics for `GET /stats`: the two pools' and the reactor's.
    pub(crate) fn stats(&self) -> serde_json::Value {
        let device_pool = self.device_pool.stats();
        let reactor = npu::reactor_stats();
        let mut device_json = pool_json(&device_pool.cache);
        device_json["backend"] = json!(format!("{:?}", device_pool.backend));
        json!({
            "pool": pool_json(&self.pool.stats()),
            "device_pool": device_json,
            "reactor": {
                "registered": reactor.registered,
                "completed": reactor.completed,
                "pending": reactor.pending(),
                "event_queries": reactor.queries,
                "parks": reactor.parks,
            },
        })
    }
}

/// A pool's counters for `GET /stats`.
fn pool_json(pool: &PoolStats) -> serde_json::Value {
    json!({
        "allocated_bytes": pool.allocated,
        "reserved_bytes": pool.reserved,
        "cached_bytes": pool.cached,
        "peak_reserved_bytes": pool.peak_reserved,
        "awaiting_blocks": pool.awaiting_blocks,
        "hits": pool.hits,
        "misses": pool.misses,
        "waiters": pool.waiters,
    })
}

impl AppState {
    /// The request counters, the in-flight count and the device's statistics. The request
    /// counters and `in_flight` are one consistent snapshot (their invariants are
    /// [`crate::requests::Snapshot`]'s), and so are the connections' counters (one value
    /// behind a lock taken per connection, not per request) and each pool's (read under the
    /// pool's lock); the three groups are read one after another.
    pub(crate) fn stats(&self) -> serde_json::Value {
        let requests = self.requests.snapshot();
        let mut stats = self.model.stats();
        stats["requests"] = json!({
            "received": requests.received,
            "served": requests.served,
            "overloaded": requests.overloaded,
            "rejected": requests.rejected,
            "failed": requests.failed,
            "cancelled": requests.cancelled,
        });
        let connections = *self.connections.borrow();
        stats["connections"] = json!({
            "open": connections.open,
            "write_timeouts": connections.write_timeouts,
            "refused": connections.refused,
        });
        stats["in_flight"] = json!(requests.in_flight);
        stats["max_in_flight"] = json!(self.config.max_in_flight);
        stats["max_connections"] = json!(self.config.max_connections);
        stats
    }
}
