//! Dashboard end-to-end tests (being written).
