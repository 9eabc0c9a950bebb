//! State shared by every handler. No globals: tests run several servers in one process.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::service::settings::SettingsSource;

pub struct AppState {
    pub settings: SettingsSource,
    /// False once shutdown has begun: `/healthz` then answers 503.
    serving: AtomicBool,
}

impl AppState {
    pub fn new(settings: SettingsSource) -> Self {
        Self {
            settings,
            serving: AtomicBool::new(true),
        }
    }

    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::Acquire)
    }

    pub fn stop_serving(&self) {
        self.serving.store(false, Ordering::Release);
    }
}
