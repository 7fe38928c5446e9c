
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0006_checkpoints_reclaim'),
        ('teams', '0004_unix_accounts'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='NoticeDismissal',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('dismissed_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
        ),
        migrations.RemoveIndex(
            model_name='notice',
            name='audit_notic_team_id_79f326_idx',
        ),
        # What a member dismissed used to leave the whole team's lists: it stays so, as acknowledged.
        migrations.RenameField(
            model_name='notice',
            old_name='dismissed_at',
            new_name='acknowledged_at',
        ),
        migrations.AlterField(
            model_name='notice',
            name='acknowledged_at',
            field=models.DateTimeField(blank=True, help_text='When a team admin acknowledged it for the whole team.', null=True),
        ),
        migrations.AddField(
            model_name='notice',
            name='acknowledged_by',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddIndex(
            model_name='notice',
            index=models.Index(fields=['team', 'acknowledged_at', 'created_at'], name='audit_notic_team_id_37c79b_idx'),
        ),
        migrations.AddField(
            model_name='noticedismissal',
            name='notice',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='dismissals', to='audit.notice'),
        ),
        migrations.AddField(
            model_name='noticedismissal',
            name='user',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddConstraint(
            model_name='noticedismissal',
            constraint=models.UniqueConstraint(fields=('notice', 'user'), name='notice_dismissed_once_per_user'),
        ),
    ]
