//! Model readers.
