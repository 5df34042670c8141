//! What the handlers and the connection loop share, and the counters they keep in it.

use tokio::sync::watch;

use crate::config::Config;
use crate::connections::Connections;
use crate::model::Model;
use crate::requests::Requests;

/// What every handler shares.
pub(crate) struct AppState {
    pub(crate) config: Config,
    pub(crate) model: Model,
    /// The inference requests' counters and admission slots.
    pub(crate) requests: Requests,
    pub(crate) connections: watch::Sender<Connections>,
}

impl AppState {
    /// Loads the model onto the device; no request is admitted yet.
    pub(crate) async fn new(config: Config) -> npu::Result<AppState> {
        Ok(AppState {
            model: Model::load(&config).await?,
            requests: Requests::new(config.max_in_flight),
            config,
            connections: watch::Sender::new(Connections::default()),
        })
    }
}
