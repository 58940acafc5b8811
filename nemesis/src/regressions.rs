//! Seeds of known defects.
