//! One file per scenario; each adds its runs to [`crate::bench::Bench`].

pub(crate) mod child;
pub(crate) mod consumer;
pub(crate) mod dashboard;
pub(crate) mod dashboard_data;
pub(crate) mod drain;
pub(crate) mod drain_child;
pub(crate) mod enqueue_bulk;
pub(crate) mod enqueue_single;
pub(crate) mod idle;
pub(crate) mod memory;
pub(crate) mod periodic;
pub(crate) mod pickup;
pub(crate) mod rate;
pub(crate) mod rate_worker;
pub(crate) mod redis;
pub(crate) mod scaling;
pub(crate) mod workflow;
