"""Agents: scripted policies (oracle, random, noop); language-model policies and trainers come later."""
