//! The terminal: line editor, sanitised output port, screen rendering, input thread, progress.
