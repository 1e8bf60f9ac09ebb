//! cairn facade
