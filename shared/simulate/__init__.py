"""The offline simulation behind ``hango simulate``: a seeded scripted user and coding model.

- :mod:`.model` — ``ScriptedCodingModel``, a deterministic provider that codes and summarizes;
- :mod:`.plan` — what the model does for one user task;
- :mod:`.user` — the scripted user's messages;
- :mod:`.commands` — ``run_command``, a pretend shell with long deterministic output;
- :mod:`.content` — generated source files, tests and logs;
- :mod:`.summary` — the model's answer to a summarizer request;
- :mod:`.runner` — wiring them to the real agent loop and playing the turns.
"""
