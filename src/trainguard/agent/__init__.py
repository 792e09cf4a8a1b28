"""Multi-host runs: a per-host agent, the controller's hub, and the wire between them.

- :mod:`~trainguard.agent.wire`: msgpack frames, limits, the HMAC handshake, sealed frames;
- :mod:`~trainguard.agent.secret`: how an agent takes the secret out of its environment;
- :mod:`~trainguard.agent.admission`: caps on unauthenticated connections, flood logging;
- :mod:`~trainguard.agent.validate`: checks of every field the controller reads from an agent;
- :mod:`~trainguard.agent.hub`: the controller's listener (:class:`AgentHub`);
- :mod:`~trainguard.agent.peers`: what the hub keeps per agent; the sequence-number rule;
- :mod:`~trainguard.agent.client`: the dialing side and the agent's outbox;
- :mod:`~trainguard.agent.host`: an agent's work on its own host (ranks, kernel log, stacks);
- :mod:`~trainguard.agent.runner`: ``trainguard agent`` itself;
- :mod:`~trainguard.agent.remote`: the controller's view of an attempt run by agents;
- :mod:`~trainguard.agent.mirror`: the controller's open append files for what agents send;
- :mod:`~trainguard.agent.backend`: backends that launch agents, not ranks;
- :mod:`~trainguard.agent.snapshots`: an agent's part of the memory snapshot tier (replica
  server, inventory, pushes to the buddy, fetches, the host's lease);
- :mod:`~trainguard.agent.snapplane`: the controller's snapshot plane over the agents.

Nothing is imported here: the agent process loads only what it uses (it starts per attempt).
"""
