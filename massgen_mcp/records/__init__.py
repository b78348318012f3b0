"""The record of a run on disk: the store that reads and writes a session's folder, the
recorder the engine writes through, session ids and liveness. It imports only ``core``, so
every floor above (the executors, the pool, the service and the faces) can read records."""
