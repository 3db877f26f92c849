"""Command palette entries for every action of the screen it is opened on."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


EXTRA = (
    ("Hint for every track", "hint_all", "steer"),
)


class SteeringCommands(Provider):
    """Steering, view and replay actions, each with its current key.

    The main screen (and the replay screen, a main screen) lists it in its ``COMMANDS``, so the
    palette offers these only there; the screen's ``PALETTE_SPECS`` say which key specs it lists,
    and its ``#grid`` which K values it can show."""

    def _entries(self) -> list[tuple[str, str, str]]:
        screen = self.screen
        keys = {ab.binding.id: self.app.get_key_display(ab.binding.with_key(k))
                for k, ab in screen.active_bindings.items() if ab.binding.id}
        specs = list(screen.PALETTE_SPECS)  # type: ignore[attr-defined]
        out = [(f"{s.description}", s.action, keys.get(s.id, "")) for s in specs if s.palette]
        out += [(label, action, "") for label, action, _ in EXTRA]
        grid = screen.query_one("#grid")
        out += [(f"Show K={k}", f"show_k({k})", "") for k in getattr(grid, "ks", [])]
        return out

    def _run(self, action: str) -> None:
        self.app.call_later(self.screen.run_action, action)

    async def discover(self) -> Hits:
        for label, action, key in self._entries():
            yield DiscoveryHit(label, partial(self._run, action), help=f"key: {key}" if key else None)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for label, action, key in self._entries():
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), partial(self._run, action), help=f"key: {key}" if key else None)
