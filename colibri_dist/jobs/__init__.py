"""Jobs room: batch inference runner, offload stress harness."""
