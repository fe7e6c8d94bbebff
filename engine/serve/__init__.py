"""`specee serve`: an OpenAI-compatible HTTP server over one engine worker (Qt-free).

errors.py: OpenAI-style error bodies; schema.py: request parsing and response shapes; bridge.py: the
asyncio side of the worker (one generation at a time, FIFO); security.py: bind rules, API key,
localhost-only checks; app.py: the Starlette routes; server.py: uvicorn and the console lines;
launcher.py: ServerProcess (start/stop `specee serve` from the app); bench.py: requests/s and time to
first token under concurrent streaming clients.
"""
