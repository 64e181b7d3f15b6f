//! Operator statements: stats, failed jobs, purge, doctor.
