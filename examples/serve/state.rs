//! What the handlers and the connection loop share, and the counters they keep in it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::StatusCode;
use tokio::sync::{Semaphore, watch};

use crate::api_error::ApiError;
use crate::config::Config;
use crate::connections::Connections;
use crate::model::Model;

/// What every handler shares.
pub(crate) struct AppState {
    pub(crate) config: Config,
    pub(crate) model: Model,
    pub(crate) admission: Arc<Semaphore>,
    pub(crate) served: AtomicU64,
    pub(crate) overloaded: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) connections: watch::Sender<Connections>,
}

impl AppState {
    /// Loads the model onto the device; no request is admitted yet.
    pub(crate) async fn new(config: Config) -> npu::Result<AppState> {
        Ok(AppState {
            model: Model::load(&config).await?,
            admission: Arc::new(Semaphore::new(config.max_in_flight)),
            config,
            served: AtomicU64::new(0),
            overloaded: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            connections: watch::Sender::new(Connections::default()),
        })
    }

    /// Requests admitted to the device and not yet answered.
    pub(crate) fn in_flight(&self) -> usize {
        self.config.max_in_flight - self.admission.available_permits()
    }

    /// Counts an answer under the counter its outcome belongs to.
    pub(crate) fn count<T>(&self, answer: &Result<T, ApiError>) {
        let counter = match answer {
            Ok(_) => &self.served,
            Err(err) if err.client_gone => &self.cancelled,
            Err(err) if err.status == StatusCode::SERVICE_UNAVAILABLE => &self.overloaded,
            Err(err) if err.status.is_client_error() => &self.rejected,
            Err(_) => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
