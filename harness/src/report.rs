//! The report stage: terminal, markdown and JSON renderings of a run (being written).
