"""llama.cpp, loaded and driven: the one home of the code that runs our native build in-process.

The worker (engine.worker) runs it for chats; the trainers (engine.train) and benchmarks
(engine.bench) run the same code, never the worker's internals. Only this package and the worker
import llama_cpp (engine.native binds our C API beside it)."""
