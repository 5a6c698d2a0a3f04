"""The run-folder format (records, the run folder, its log index and tails): read and written by every layer above,
starts no process."""
