"""Expert store: RAM cache over the mmap'd container and an SSD offload tier."""
