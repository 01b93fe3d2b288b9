"""axe-core in the browser tests: put into every document a page opens, and run over the
whole document, each violation with its rule, impact, help and where."""

from __future__ import annotations

# Every rule axe-core runs by default, or only those of the tags given.
RUN_AXE = """async (tags) => {
    const options = tags ? {runOnly: {type: "tag", values: tags}} : {};
    const results = await axe.run(document, options);
    return results.violations.map((v) => ({
        id: v.id,
        impact: v.impact,
        help: v.help,
        targets: v.nodes.map((node) => node.target.join(" ")),
    }));
}"""


def with_axe(page, axe_script, browser_problems):
    """The page, with axe-core in every document it opens from now on."""
    page.add_init_script(path=str(axe_script))
    browser_problems.tool_in_page(str(axe_script))
    return page


def axe_violations(page, tags: list[str] | None = None) -> list[dict]:
    """axe-core's violations on the page as it is now (of the rules of `tags`, or all)."""
    return page.evaluate(RUN_AXE, tags)


def described(found: list[dict]) -> str:
    return "\n".join(
        f"{v['id']} ({v['impact']}): {v['help']} at {', '.join(v['targets'][:5])}" for v in found
    )
