//! Fault suite (being written).
