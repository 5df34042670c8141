//! The JSON of `GET /stats` in one place, so that it can be read against the table in
//! docs/observability.md field by field.

use std::sync::atomic::{AtomicU64, Ordering};

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
    /// The request counters, the in-flight count and the device's statistics.
    pub(crate) fn stats(&self) -> serde_json::Value {
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut stats = self.model.stats();
        stats["requests"] = json!({
            "served": count(&self.served),
            "overloaded": count(&self.overloaded),
            "rejected": count(&self.rejected),
            "failed": count(&self.failed),
            "cancelled": count(&self.cancelled),
        });
        let connections = *self.connections.borrow();
        stats["connections"] = json!({
            "open": connections.open,
            "write_timeouts": connections.write_timeouts,
            "refused": connections.refused,
        });
        stats["in_flight"] = json!(self.in_flight());
        stats["max_in_flight"] = json!(self.config.max_in_flight);
        stats["max_connections"] = json!(self.config.max_connections);
        stats
    }
}
