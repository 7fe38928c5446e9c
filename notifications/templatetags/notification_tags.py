"""The team page's Notifications section ({% team_channels team %}): teams sits below notifications, so
its page loads the section as a tag."""

from django import template

from notifications.permissions import team_rights

register = template.Library()


@register.inclusion_tag("portal/notifications/_team_channels.html", takes_context=True)
def team_channels(context, team):
    """The team's channels, for its members (an operator outside the team sees none)."""
    show, can_add = team_rights(context["request"].user, team)
    return {
        "team": team,
        "show": show,
        "channels": team.notification_channels.all() if show else [],
        "can_add": can_add,
    }
